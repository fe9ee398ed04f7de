package hf

import (
	"encoding/json"
	"fmt"
	"math"
)

// GenerationConfig holds the sampling defaults of generation_config.json.
// Nil pointers are fields the file does not set.
type GenerationConfig struct {
	DoSample    *bool
	Temperature *float64
	TopK        *int
	TopP        *float64
	EOSTokenIDs []int // eos_token_id, which may be one id or a list; stop on any
	PadTokenID  *int
	BOSTokenID  *int
}

type generationJSON struct {
	DoSample    *bool           `json:"do_sample"`
	Temperature *float64        `json:"temperature"`
	TopK        *int            `json:"top_k"`
	TopP        *float64        `json:"top_p"`
	EOSTokenID  json.RawMessage `json:"eos_token_id"`
	PadTokenID  *int            `json:"pad_token_id"`
	BOSTokenID  *int            `json:"bos_token_id"`
}

// ParseGenerationConfig reads generation_config.json content; token ids must
// be below vocabSize. name is used in errors.
func ParseGenerationConfig(data []byte, name string, vocabSize int) (*GenerationConfig, error) {
	var j generationJSON
	if err := unmarshalObject(data, &j); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	gc := &GenerationConfig{DoSample: j.DoSample, Temperature: j.Temperature, TopK: j.TopK, TopP: j.TopP, PadTokenID: j.PadTokenID, BOSTokenID: j.BOSTokenID}
	eos, err := parseTokenIDs(j.EOSTokenID)
	if err != nil {
		return nil, fmt.Errorf("%s: eos_token_id: %v", name, err)
	}
	gc.EOSTokenIDs = eos
	if err := gc.check(vocabSize); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	return gc, nil
}

// parseTokenIDs accepts absent, null, one integer or a list of integers.
func parseTokenIDs(raw json.RawMessage) ([]int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one int
	if err := json.Unmarshal(raw, &one); err == nil {
		return []int{one}, nil
	}
	var list []int
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("want an integer or a list of integers, found %s", truncate(raw))
	}
	return list, nil
}

func (gc *GenerationConfig) check(vocabSize int) error {
	if t := gc.Temperature; t != nil && (!(*t >= 0) || math.IsInf(*t, 0)) {
		return fmt.Errorf("temperature %v must be a finite number >= 0", *t)
	}
	if k := gc.TopK; k != nil && *k < 0 {
		return fmt.Errorf("top_k %d must be >= 0", *k)
	}
	if p := gc.TopP; p != nil && !(*p > 0 && *p <= 1) {
		return fmt.Errorf("top_p %v must be in (0, 1]", *p)
	}
	checkID := func(field string, id *int) error {
		if id != nil && (*id < 0 || *id >= vocabSize) {
			return fmt.Errorf("%s %d is outside the vocabulary [0, %d)", field, *id, vocabSize)
		}
		return nil
	}
	for i := range gc.EOSTokenIDs {
		if err := checkID(fmt.Sprintf("eos_token_id[%d]", i), &gc.EOSTokenIDs[i]); err != nil {
			return err
		}
	}
	if err := checkID("pad_token_id", gc.PadTokenID); err != nil {
		return err
	}
	return checkID("bos_token_id", gc.BOSTokenID)
}

func truncate(b []byte) string {
	const n = 40
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
