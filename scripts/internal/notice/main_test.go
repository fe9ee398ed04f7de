package main

import (
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// TestNoticeIsCurrent fails when the checked-in NOTICE differs from what the commands link now:
// a module added, removed or upgraded in go.mod, or a new toolchain, needs
// `go run ./scripts/internal/notice -w`. It reads only the module cache (offline).
func TestNoticeIsCurrent(t *testing.T) {
	root, n := collectModule(t)
	if err := checkFile(filepath.Join(root, "NOTICE"), n.render()); err != nil {
		t.Fatal(err)
	}
}

// collectModule collects the notices of the module the test runs in and
// returns its root with them.
func collectModule(t *testing.T) (string, *notices) {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	n, err := collect(root)
	if err != nil {
		t.Fatal(err)
	}
	return root, n
}

// The listing holds what the commands link and nothing that only tests use.
func TestNoticeListsLinkedModulesOnly(t *testing.T) {
	root, n := collectModule(t)
	listed := map[string]bool{}
	for _, m := range n.modules {
		listed[m.path] = true
		if len(m.licences) == 0 {
			t.Errorf("%s: no licence file", m.path)
		}
	}
	for _, linked := range []string{"github.com/ardanlabs/jinja", "github.com/ebitengine/purego", "github.com/peterh/liner", "github.com/klauspost/compress"} {
		if !listed[linked] {
			t.Errorf("%s is linked by the commands but not listed", linked)
		}
	}
	for _, testOnly := range []string{"github.com/openai/openai-go/v3", "github.com/anthropics/anthropic-sdk-go/v2"} {
		if listed[testOnly] {
			t.Errorf("%s is used only by tests but listed", testOnly)
		}
	}
	if want, _ := pinnedToolchain(filepath.Join(root, "go.mod")); n.goVersion != want || !strings.HasPrefix(want, "go1.") {
		t.Errorf("toolchain %q, go.mod pins %q", n.goVersion, want)
	}
}

func TestClassify(t *testing.T) {
	mit := "MIT License\n\nCopyright (c) 2020 A\n\nPermission is hereby granted, free of charge, to any person obtaining a copy\nof this software"
	bsd2 := "> Redistribution and use in source and binary forms, with or without\n> modification, are permitted provided that the following conditions are met:"
	bsd3 := "Redistribution and use in source and binary forms, with or without modification...\n   * Neither the name of Google Inc. nor the names of its\ncontributors may be used to endorse or promote products derived from\nthis software without specific prior written permission."
	apache := "                                 Apache License\n                           Version 2.0, January 2004\n ... 3. Grant of Patent License. Subject to"
	mpl := "Mozilla Public License, version 2.0\n\n1. Definitions\n1.1. \"Contributor\" ... \"Covered Software\" means"
	isc := "ISC License\n\nPermission to use, copy, modify, and/or distribute this software for any\npurpose with or without fee is hereby granted"
	cases := []struct {
		name, text string
		want       []string
	}{
		{"MIT", mit, []string{"MIT"}},
		{"BSD-2-Clause, quoted", bsd2, []string{"BSD-2-Clause"}},
		{"BSD-3-Clause", bsd3, []string{"BSD-3-Clause"}},
		{"Apache-2.0", apache, []string{"Apache-2.0"}},
		{"MPL-2.0", mpl, []string{"MPL-2.0"}},
		{"ISC", isc, []string{"ISC"}},
		{"several, in order", bsd3 + "\n-----\n" + apache + "\n-----\n" + mit, []string{"BSD-3-Clause", "Apache-2.0", "MIT"}},
		{"unknown", "All rights reserved. You may not copy this.", []string{}},
		{"Apache 1.1 is not 2.0", "Apache License\nVersion 1.1", []string{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := classify(c.text); !reflect.DeepEqual(got, c.want) {
				t.Errorf("classify = %q, want %q", got, c.want)
			}
		})
	}
}

func TestCopyrightLines(t *testing.T) {
	text := "Copyright (c) 2012 The Go Authors. All rights reserved.\n" +
		"> Copyright © 2011 Russ Ross\n" +
		"   Copyright 2016-2017 The New York Times Company\n" +
		"   Copyright [yyyy] [name of copyright owner]\n" +
		"   Copyright {yyyy} {name of copyright owner}\n" +
		"copyright notice, this list of conditions\n" +
		"Copyright (c) 2012 The Go Authors. All rights reserved.\n"
	want := []string{
		"Copyright (c) 2012 The Go Authors. All rights reserved.",
		"Copyright © 2011 Russ Ross",
		"Copyright 2016-2017 The New York Times Company",
	}
	if got := copyrightLines(text); !reflect.DeepEqual(got, want) {
		t.Errorf("copyrightLines = %q, want %q", got, want)
	}
}

// A package is governed by the nearest licence file at or above it inside its module.
func TestGoverningLicences(t *testing.T) {
	mod := t.TempDir()
	for _, f := range []string{"LICENSE", "a/b/COPYING.txt", "c/LICENSE-MIT", "c/LICENSE-APACHE", "c/notes.txt"} {
		if err := os.MkdirAll(filepath.Join(mod, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(mod, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"a/b/deep", "d"} {
		if err := os.MkdirAll(filepath.Join(mod, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cases := map[string][]string{
		".":        {"LICENSE"},
		"a":        {"LICENSE"},
		"a/b/deep": {"a/b/COPYING.txt"},
		"c":        {"c/LICENSE-APACHE", "c/LICENSE-MIT"},
		"d":        {"LICENSE"},
		"a/b":      {"a/b/COPYING.txt"},
	}
	for pkg, want := range cases {
		got, err := governingLicences(mod, filepath.Join(mod, pkg))
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %q, %v; want %q", pkg, got, err, want)
		}
	}
	if err := os.Remove(filepath.Join(mod, "LICENSE")); err != nil {
		t.Fatal(err)
	}
	if _, err := governingLicences(mod, filepath.Join(mod, "d")); err == nil || !strings.Contains(err.Error(), "no LICENSE") {
		t.Errorf("a package without a licence file: err = %v, want one saying there is no LICENSE", err)
	}
}

func TestParseVersionM(t *testing.T) {
	out := "/tmp/bin/nvmai-run: go1.27.3\n" +
		"\tpath\tgithub.com/nvmai/nvmai/cmd/nvmai-run\n" +
		"\tmod\tgithub.com/nvmai/nvmai\t(devel)\t\n" +
		"\tdep\tgithub.com/ardanlabs/jinja\tv1.12.0\th1:abc=\n" +
		"\tdep\tgolang.org/x/sys\tv0.50.0\th1:def=\n" +
		"\t=>\t../sys\t(devel)\t\n" +
		"\tbuild\t-trimpath=true\n"
	goVersion, deps, err := parseVersionM(out)
	if err != nil {
		t.Fatal(err)
	}
	if goVersion != "go1.27.3" || !reflect.DeepEqual(deps, []string{"github.com/ardanlabs/jinja v1.12.0", "golang.org/x/sys v0.50.0"}) {
		t.Errorf("got %q %q", goVersion, deps)
	}
	if _, _, err := parseVersionM("/tmp/x: could not read Go build info from /tmp/x: not a Go executable\n"); err == nil {
		t.Error("a file without build information was accepted")
	}
}

// The test binary itself stands in for a built command: it links no module, so a listed one is
// named as not linked, and a different toolchain is named too.
func TestCheckBinariesNamesTheDifference(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	n := &notices{goVersion: runtime.Version(), modules: []moduleEntry{{path: "a.example/x", version: "v1.0.0"}}}
	err = checkBinaries(n, []string{self})
	if err == nil || !strings.Contains(err.Error(), "NOTICE lists a.example/x v1.0.0, which none of the built commands links") {
		t.Errorf("err = %v, want one naming the listed module no command links", err)
	}
	n = &notices{goVersion: "go1.0"}
	if err := checkBinaries(n, []string{self}); err == nil || !strings.Contains(err.Error(), "NOTICE names go1.0") {
		t.Errorf("err = %v, want one naming the toolchain difference", err)
	}
	if err := checkBinaries(n, nil); err == nil {
		t.Error("no binaries: accepted")
	}
}

func TestStaleNoticeIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "NOTICE")
	if err := os.WriteFile(path, []byte("nvmai — third-party notices\n\nGo (go1.26)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := checkFile(path, "nvmai — third-party notices\n\nGo (go1.27.3)\n")
	if err == nil || !strings.Contains(err.Error(), "line 3") || !strings.Contains(err.Error(), "-w") {
		t.Errorf("err = %v, want one naming line 3 and how to regenerate", err)
	}
}
