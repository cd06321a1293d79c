// Command nmeter is the part of busybox's nmeter applet the node e2e suite
// uses, for the busybox stand-in images (Debian's busybox-static has no
// nmeter): `nmeter [-d MSEC] FORMAT` prints FORMAT once per interval, where
// %t is the wall time as HH:MM:SS and %Nt the same with N (1-6) digits of the
// second's fraction, and %% a percent sign; other text is printed as it is.
// The specs run `nmeter -d0 '%3t' | head -n1` for a millisecond timestamp.
// Busybox's other directives (CPU, memory, ... counters) are not supported:
// they are an error.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	delay, format, err := parseArgs(os.Args[1:])
	if err == nil {
		_, err = render(format, time.Now())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nmeter:", err)
		fmt.Fprintln(os.Stderr, "usage: nmeter [-d MSEC] FORMAT")
		os.Exit(2)
	}
	w := bufio.NewWriter(os.Stdout)
	for {
		line, _ := render(format, time.Now())
		w.WriteString(line + "\n")
		if err := w.Flush(); err != nil {
			os.Exit(1) // the reader went away (head -n1)
		}
		time.Sleep(delay)
	}
}

// parseArgs reads busybox's arguments: -d MSEC or -dMSEC, then FORMAT.
func parseArgs(args []string) (time.Duration, string, error) {
	delay := time.Second
	for len(args) > 0 && strings.HasPrefix(args[0], "-d") {
		v := strings.TrimPrefix(args[0], "-d")
		args = args[1:]
		if v == "" {
			if len(args) == 0 {
				return 0, "", fmt.Errorf("-d needs a number of milliseconds")
			}
			v, args = args[0], args[1:]
		}
		ms, err := strconv.Atoi(v)
		if err != nil || ms < 0 {
			return 0, "", fmt.Errorf("-d %q: not a number of milliseconds", v)
		}
		delay = time.Duration(ms) * time.Millisecond
	}
	if len(args) != 1 {
		return 0, "", fmt.Errorf("want one FORMAT, got %q", args)
	}
	return delay, args[0], nil
}

// render is format at now.
func render(format string, now time.Time) (string, error) {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		i++
		digits := 0
		if i < len(format) && format[i] >= '0' && format[i] <= '9' {
			digits = int(format[i] - '0')
			i++
		}
		if i >= len(format) {
			return "", fmt.Errorf("format %q ends in a directive", format)
		}
		switch format[i] {
		case '%':
			b.WriteByte('%')
		case 't':
			if digits > 6 {
				digits = 6
			}
			b.WriteString(now.Format("15:04:05"))
			if digits > 0 {
				frac := fmt.Sprintf("%06d", now.Nanosecond()/1000)
				b.WriteString("." + frac[:digits])
			}
		default:
			return "", fmt.Errorf("format %q: directive %%%c is not supported", format, format[i])
		}
	}
	return b.String(), nil
}
