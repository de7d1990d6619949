// Package e2e holds shedkit's end-to-end test: it starts Jaeger on
// 127.0.0.1 with in-memory storage, runs a short demo that exports its
// traces by OTLP, and checks through Jaeger's HTTP query API that the traces
// have the expected shape: gateway server spans tagged with the admission
// decision (and the reason of rejections), one logical INTERNAL span per
// outgoing request with one CLIENT span per attempt and the right
// http.request.resend_count values, and upstream spans under the attempts.
//
// The test is behind the e2e build tag. Run it with `make e2e`, which builds
// Jaeger from the Go module proxy once (cached under .cache/) and sets
// JAEGER_BIN.
package e2e
