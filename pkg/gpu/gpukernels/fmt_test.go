package gpukernels

import "strconv"

func fmtG(f float64) string { return strconv.FormatFloat(f, 'g', 4, 64) }
