// Command hello is the program toolbuild's tests build. It prints greeting,
// which a test sets with -ldflags -X.
package main

import "fmt"

var greeting = "hello"

func main() { fmt.Println(greeting) }
