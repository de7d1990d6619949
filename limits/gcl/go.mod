module github.com/shedkit/shedkit/limits/gcl

go 1.26.0

require (
	github.com/platinummonkey/go-concurrency-limits v1.0.0
	github.com/shedkit/shedkit v0.0.0-00010101000000-000000000000
)

replace github.com/shedkit/shedkit => ../..
