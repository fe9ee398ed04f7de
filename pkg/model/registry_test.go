package model

import (
	"strings"
	"testing"
)

type nullModel struct{}

func (nullModel) Info() Info                           { return Info{Name: "null"} }
func (nullModel) NewState(StateOptions) (State, error) { return nil, nil }
func (nullModel) Close()                               {}

func TestRegistryLookup(t *testing.T) {
	entry := Entry{
		Load:      func(Request) (Model, error) { return nullModel{}, nil },
		Footprint: func(FootprintRequest) (StateFootprint, error) { return StateFootprint{MaxContext: 7}, nil },
	}
	Register("test_arch", "test_dev", entry)
	e, err := Lookup("test_arch", "test_dev")
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := e.Footprint(FootprintRequest{}); f.MaxContext != 7 {
		t.Fatalf("footprint %+v, want the registered one", f)
	}
	for _, c := range []struct{ arch, dev, want string }{
		{"test_arch", "other_dev", "use --engine test_dev"},
		{"other_arch", "test_dev", `architecture "other_arch" is not supported`},
		{"other_arch", "nowhere", "no nowhere engine in this build"},
	} {
		if _, err := Lookup(c.arch, c.dev); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Lookup(%s, %s) = %v, want an error containing %q", c.arch, c.dev, err, c.want)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("registering a pair twice did not panic")
		}
	}()
	Register("test_arch", "test_dev", entry)
}
