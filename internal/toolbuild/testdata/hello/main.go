// Command hello is the program toolbuild's tests build.
package main

func main() { println("hello") }
