package bench_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// readmeSnippet says how to compile one ```go block of ../README.md. A
// block is found by marker, a string only it contains, so that editing
// the README elsewhere never shifts the table.
type readmeSnippet struct {
	marker  string
	imports []string      // what the wrapping uses and the block does not import
	decls   string        // package-level declarations the block uses but does not define
	funcs   []snippetFunc // nil: the block is a whole program, built as is
}

// snippetFunc wraps lines of a fragment in a function, whose parameters
// declare what the fragment uses but the README does not define.
type snippetFunc struct {
	from string // the fragment's line this function starts at; "" means its first line
	sig  string // the function's signature
	tail string // one line after the fragment's lines: return what it declares
}

var readmeSnippets = []readmeSnippet{
	{marker: "func main() {"},
	{
		marker:  "shedgrpc.NewServer(",
		imports: []string{"google.golang.org/grpc", "google.golang.org/grpc/credentials", "github.com/shedkit/shedkit/shed"},
		funcs: []snippetFunc{{
			sig:  "func serve(lim *shed.Limiter, target string, creds credentials.TransportCredentials) (any, any, any, error)",
			tail: "return gs, cli, cc, err",
		}},
	},
	{
		marker:  "lim.Acquire(",
		imports: []string{"context", "errors", "github.com/shedkit/shedkit/shed"},
		funcs: []snippetFunc{{
			sig: "func call(ctx context.Context, lim *shed.Limiter, tokens int64, callUpstream func(context.Context) error) error",
		}},
	},
	{
		// Two places of a service: start-up, and a handler that uses
		// what start-up made.
		marker: "fanout.RunSlice(",
		imports: []string{"context", "net/http", "time",
			"github.com/shedkit/shedkit/shed", "github.com/shedkit/shedkit/shed/fanout"},
		decls: "type Item struct{}",
		funcs: []snippetFunc{
			{sig: "func startUp() (*shed.Limiter, error)", tail: "return upstream, err"},
			{
				from: "// In the handler:",
				sig:  "func handle(upstream *shed.Limiter, r *http.Request, ids []string, fetchItem func(context.Context, string) (Item, error), out []fanout.Result[Item]) error",
				tail: "return err",
			},
		},
	},
	{
		marker: "retrybudget.NewTransport(",
		imports: []string{"github.com/shedkit/shedkit/shed", "github.com/shedkit/shedkit/retrybudget",
			"github.com/shedkit/shedkit/middleware/nethttp", "github.com/shedkit/shedkit/middleware/shedhttp"},
		funcs: []snippetFunc{{
			sig:  "func propagate(lim *shed.Limiter) (any, any, error)",
			tail: "return rt, mw, err",
		}},
	},
}

// readmeBlock is one ```go block of the README.
type readmeBlock struct {
	n     int      // its position among the README's Go blocks, from 1
	line  int      // the README line of its first line of code
	lines []string // its code
}

func (b readmeBlock) String() string {
	first := ""
	if len(b.lines) > 0 {
		first = b.lines[0]
	}
	return fmt.Sprintf("README.md Go block %d (line %d: %q)", b.n, b.line, first)
}

// TestReadmeSnippetsCompile builds every Go block of the README, what a
// new user copies first, against the working tree, with one go command.
// It lives in the bench module because that module already requires every
// package the blocks import, gRPC and middleware/grpc included, and so
// builds them both with the go.work and with GOWORK=off (make test).
func TestReadmeSnippetsCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the README's Go blocks with the go command")
	}
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := readmeGoBlocks(string(readme))
	snippets, err := matchReadmeSnippets(blocks, readmeSnippets)
	if err != nil {
		t.Fatal(err)
	}
	// Inside the module, so that the go command builds the files with its
	// requirements; "_" keeps the directory out of ./... patterns.
	dir, err := os.MkdirTemp(".", "_readme-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	pkgs := make([]string, len(blocks))
	srcs := make([]string, len(blocks))
	for i, b := range blocks {
		pkgs[i] = "./" + filepath.ToSlash(filepath.Join(dir, fmt.Sprintf("block%d", b.n)))
		srcs[i] = writeReadmeSnippet(t, filepath.FromSlash(pkgs[i]), b, snippets[i])
	}
	outputs, err := buildReadmeSnippets(pkgs)
	if err == nil {
		return
	}
	for i, out := range outputs {
		if out == "" {
			continue
		}
		msg := fmt.Sprintf("%v no longer compiles:\n%s", blocks[i], out)
		if !onlyReadmeLines(out) {
			msg += "wrapped by readmeSnippets as:\n" + numberLines(srcs[i])
		}
		t.Error(msg)
	}
	if !t.Failed() {
		t.Fatalf("go build of the README's Go blocks: %v", err)
	}
}

// readmeGoBlocks returns the README's ```go blocks, in order.
func readmeGoBlocks(readme string) []readmeBlock {
	var blocks []readmeBlock
	var cur *readmeBlock
	for i, line := range strings.Split(readme, "\n") {
		fence := strings.TrimRight(line, " \t\r")
		switch {
		case cur == nil && fence == "```go":
			cur = &readmeBlock{n: len(blocks) + 1, line: i + 2}
		case cur != nil && fence == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, strings.TrimRight(line, "\r"))
		}
	}
	return blocks
}

// matchReadmeSnippets returns the table entry of each block. Every block
// must match exactly one entry and every entry one block, so that a new,
// removed or rewritten block fails until the table says how to build it.
func matchReadmeSnippets(blocks []readmeBlock, table []readmeSnippet) ([]readmeSnippet, error) {
	if len(blocks) != len(table) {
		var list strings.Builder
		for _, b := range blocks {
			fmt.Fprintf(&list, "\n\t%v", b)
		}
		return nil, fmt.Errorf("README.md has %d Go blocks and readmeSnippets %d entries: give each block an entry:%s", len(blocks), len(table), list.String())
	}
	out := make([]readmeSnippet, len(blocks))
	used := make(map[int]bool)
	for _, s := range table {
		var found []readmeBlock
		for _, b := range blocks {
			if strings.Contains(strings.Join(b.lines, "\n"), s.marker) {
				found = append(found, b)
			}
		}
		if len(found) != 1 {
			return nil, fmt.Errorf("readmeSnippets marker %q is in %d README.md Go blocks, want 1: %v", s.marker, len(found), found)
		}
		b := found[0]
		if used[b.n] {
			return nil, fmt.Errorf("%v matches two markers of readmeSnippets (%q, %q)", b, out[b.n-1].marker, s.marker)
		}
		used[b.n] = true
		out[b.n-1] = s
	}
	return out, nil
}

// writeReadmeSnippet writes the block, wrapped as its entry says, into
// dir/snippet.go. //line directives map the block's lines back to the
// README, so that compiler errors name README.md lines.
func writeReadmeSnippet(t *testing.T, dir string, b readmeBlock, s readmeSnippet) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var src string
	if s.funcs == nil {
		src = fmt.Sprintf("//line README.md:%d\n%s\n", b.line, strings.Join(b.lines, "\n"))
	} else {
		var err error
		if src, err = wrapReadmeFragment(b, s); err != nil {
			t.Fatalf("%v: %v", b, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "snippet.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return src
}

// wrapReadmeFragment turns a fragment into a package: the wrapping's
// imports, the fragment's own leading import lines, the entry's
// declarations, then one function per snippetFunc.
func wrapReadmeFragment(b readmeBlock, s readmeSnippet) (string, error) {
	var w snippetWriter
	w.printf("package block%d\n\nimport (\n", b.n)
	for _, imp := range s.imports {
		w.printf("\t%q\n", imp)
	}
	w.printf(")\n")
	body := leadingImports(b.lines)
	w.lines(b.line, b.lines[:body])
	w.printf("\n%s\n", s.decls)
	starts, err := funcStarts(b.lines, body, s.funcs)
	if err != nil {
		return "", err
	}
	for i, f := range s.funcs {
		end := len(b.lines)
		if i+1 < len(starts) {
			end = starts[i+1]
		}
		w.printf("\n%s {\n", f.sig)
		w.lines(b.line+starts[i], b.lines[starts[i]:end])
		// The tail is the table's, not the README's: errors there name it.
		w.printf("//line readmeSnippets.tail:1\n%s\n}\n", f.tail)
	}
	return w.String(), nil
}

// leadingImports returns how many of the fragment's first lines are
// import declarations (or blank lines between them).
func leadingImports(lines []string) int {
	n, inBlock := 0, false
	for i, line := range lines {
		l := strings.TrimSpace(line)
		switch {
		case inBlock:
			inBlock = l != ")"
		case l == "import (":
			inBlock = true
		case l == "" || strings.HasPrefix(l, "import "):
		default:
			return n
		}
		n = i + 1
	}
	return n
}

// funcStarts returns the fragment line each function starts at.
func funcStarts(lines []string, body int, funcs []snippetFunc) ([]int, error) {
	starts := make([]int, len(funcs))
	for i, f := range funcs {
		starts[i] = body
		if f.from == "" {
			continue
		}
		starts[i] = -1
		for j := body; j < len(lines); j++ {
			if strings.TrimSpace(lines[j]) == f.from {
				starts[i] = j
				break
			}
		}
		if starts[i] < 0 || (i > 0 && starts[i] <= starts[i-1]) {
			return nil, fmt.Errorf("no line %q after the previous function's start: update readmeSnippets", f.from)
		}
	}
	return starts, nil
}

// snippetWriter builds a generated file.
type snippetWriter struct{ strings.Builder }

func (w *snippetWriter) printf(format string, args ...any) { fmt.Fprintf(w, format, args...) }

// lines writes README lines, starting at README line first.
func (w *snippetWriter) lines(first int, lines []string) {
	if len(lines) == 0 {
		return
	}
	w.printf("//line README.md:%d\n%s\n", first, strings.Join(lines, "\n"))
}

// buildReadmeSnippets builds every package with one go command and
// returns the compiler's output for each package, and the command's error
// with what it printed when no package's output says why it failed.
func buildReadmeSnippets(pkgs []string) ([]string, error) {
	cmd := exec.Command("go", append([]string{"build", "-json"}, pkgs...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err == nil {
		return nil, nil
	}
	byPath := buildOutputs(stdout)
	outputs := make([]string, len(pkgs))
	for path, out := range byPath {
		for i, p := range pkgs {
			// A package that cannot be loaded is reported under the
			// import path it misses, at a position in the block's dir.
			dir := strings.TrimPrefix(p, "./") + "/"
			if strings.HasSuffix(path, strings.TrimPrefix(p, ".")) || strings.Contains(out, dir) {
				outputs[i] += strings.ReplaceAll(out, dir, "")
			}
		}
	}
	return outputs, fmt.Errorf("%w\n%s%s", err, stdout, stderr.Bytes())
}

// onlyReadmeLines reports whether every error of a compiler output is at
// a README line, so that the wrapping need not be shown.
func onlyReadmeLines(out string) bool {
	for line := range strings.Lines(out) {
		continued := strings.HasPrefix(line, "\t") || strings.TrimSpace(line) == ""
		if !continued && !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, "README.md:") {
			return false
		}
	}
	return true
}

func numberLines(src string) string {
	var b strings.Builder
	for i, line := range strings.Split(strings.TrimSuffix(src, "\n"), "\n") {
		fmt.Fprintf(&b, "%4d  %s\n", i+1, line)
	}
	return b.String()
}

// buildOutputs collects the compiler output of each package from the
// events of go build -json.
func buildOutputs(stream []byte) map[string]string {
	outputs := make(map[string]string)
	dec := json.NewDecoder(bytes.NewReader(stream))
	for {
		var ev struct{ ImportPath, Action, Output string }
		if dec.Decode(&ev) != nil {
			return outputs
		}
		if ev.Action == "build-output" {
			outputs[ev.ImportPath] += ev.Output
		}
	}
}
