module github.com/dedup-go/dedup/tools

go 1.26.0

require (
	github.com/stretchr/testify v1.12.1
	github.com/yuin/goldmark v1.8.7
	golang.org/x/mod v0.43.0
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect
