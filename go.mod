module github.com/dedup-go/dedup

go 1.26.0

require (
	github.com/hashicorp/golang-lru/v2 v2.0.7 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sync v0.24.0 // indirect
)
