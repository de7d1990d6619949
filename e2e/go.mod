module github.com/shedkit/shedkit/e2e

go 1.26.0
