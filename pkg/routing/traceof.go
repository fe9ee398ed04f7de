package routing

import "fmt"

// TraceOf gathers src's ids at the run positions given, in that order, into
// a trace of geom whose first position is 0: the positions a bench decoded,
// to simulate a cache on exactly those (SimulateLRUFrom). Each row is
// checked as a trace file's line is: TopK distinct ids from 0 to
// Experts−1.
func TraceOf(src Source, geom Geometry, positions []int) (*Trace, error) {
	t, err := NewTrace(geom, 0)
	if err != nil {
		return nil, err
	}
	row := make([]int32, 0, geom.Layers*geom.TopK)
	var ids []int
	for _, pos := range positions {
		row = row[:0]
		for l := range geom.Layers {
			if ids, err = src.Experts(pos, l, ids); err != nil {
				return nil, err
			}
			if len(ids) != geom.TopK {
				return nil, fmt.Errorf("routing: %s gives %d experts at position %d layer %d, want top-k %d", src.Describe(), len(ids), pos, l, geom.TopK)
			}
			at := len(row)
			for _, e := range ids {
				if e < 0 || e >= geom.Experts {
					return nil, fmt.Errorf("routing: %s gives expert %d at position %d layer %d, outside 0 to %d", src.Describe(), e, pos, l, geom.Experts-1)
				}
				for _, o := range row[at:] {
					if int(o) == e {
						return nil, fmt.Errorf("routing: %s gives expert %d twice at position %d layer %d", src.Describe(), e, pos, l)
					}
				}
				row = append(row, int32(e))
			}
		}
		t.appendToken(row)
	}
	return t, nil
}
