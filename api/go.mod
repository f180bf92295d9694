module github.com/gvxrun/gvx/api

go 1.26.3
