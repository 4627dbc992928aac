module github.com/dedup-go/dedup

go 1.26.0

require (
	github.com/hashicorp/golang-lru/v2 v2.0.7
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
	golang.org/x/sync v0.24.0
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect
