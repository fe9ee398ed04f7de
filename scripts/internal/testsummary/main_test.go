package main

import (
	"bytes"
	"strings"
	"testing"
)

func ev(action, pkg, test, output string) string {
	return `{"Action":"` + action + `","Package":"` + pkg + `","Test":"` + test + `","Output":` + quote(output) + "}\n"
}

func quote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\t", `\t`)
	return `"` + r.Replace(s) + `"`
}

func TestSummary(t *testing.T) {
	const p = "github.com/nvmai/nvmai/pkg/x"
	tests := []struct {
		name      string
		in        string
		failed    bool
		out, skip []string // substrings
		notOut    []string
	}{
		{"pass with fixture and other skips",
			ev("run", p, "TestA", "") + ev("output", p, "TestA", "=== RUN   TestA\n") +
				ev("output", p, "TestA", "    helpers_test.go:38: fixture /x/dev absent (stat: no such file); the reference fixtures live in ../shared/fixtures next to the repository\n") +
				ev("output", p, "TestA", "--- SKIP: TestA (0.00s)\n") + ev("skip", p, "TestA", "") +
				ev("output", p, "TestB", "    b_test.go:9: NVMAI_SLOW not set\n") + ev("skip", p, "TestB", "") +
				ev("output", p, "TestC", "=== RUN   TestC\n--- PASS: TestC (0.00s)\n") + ev("pass", p, "TestC", "") +
				ev("output", p, "", "PASS\n") + ev("output", p, "", "ok  \t"+p+"\t0.5s\n") + ev("pass", p, "", ""),
			false, []string{"ok  \t" + p + "\t0.5s\n"},
			[]string{"1 reference-fixture tests skipped", "pkg/x.TestA", "beside the clone", "1 other tests skipped: NVMAI_SLOW not set"},
			[]string{"=== RUN", "PASS\n", "--- PASS"}},
		{"failure shows the test's output",
			ev("output", p, "TestD", "=== RUN   TestD\n    d_test.go:3: got 1 want 2\n--- FAIL: TestD (0.00s)\n") + ev("fail", p, "TestD", "") +
				ev("output", p, "", "FAIL\n") + ev("output", p, "", "FAIL\t"+p+"\t0.1s\n") + ev("fail", p, "", ""),
			true, []string{"d_test.go:3: got 1 want 2", "--- FAIL: TestD", "FAIL\t" + p + "\t0.1s"},
			[]string{"0 reference-fixture tests skipped"}, []string{"=== RUN"}},
		{"build failure",
			`{"ImportPath":"` + p + `","Action":"build-output","Output":"x.go:1: syntax error\n"}` + "\n" +
				`{"ImportPath":"` + p + `","Action":"build-fail"}` + "\n",
			true, []string{"x.go:1: syntax error"}, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, skips bytes.Buffer
			s := &summary{out: &out, output: map[key]*strings.Builder{}, otherSkip: map[string]int{}}
			if err := s.read(strings.NewReader(tc.in)); err != nil {
				t.Fatal(err)
			}
			s.writeSkips(&skips)
			if s.failed != tc.failed {
				t.Errorf("failed = %v", s.failed)
			}
			for _, w := range tc.out {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			for _, w := range tc.notOut {
				if strings.Contains(out.String(), w) {
					t.Errorf("output has %q:\n%s", w, out.String())
				}
			}
			for _, w := range tc.skip {
				if !strings.Contains(skips.String(), w) {
					t.Errorf("summary lacks %q:\n%s", w, skips.String())
				}
			}
		})
	}
}
