package volumes

import "syscall"

type syscallStat = syscall.Stat_t
