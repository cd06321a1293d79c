module nkprobe

go 1.21
