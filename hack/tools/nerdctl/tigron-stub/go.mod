module github.com/containerd/nerdctl/mod/tigron

go 1.24
