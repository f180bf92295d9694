// Package contracttest holds gvx's cross-module contract spelled out as
// data (contract.json), for the tests of both Go modules.
//
// Each module's tests check their real encoders, decoders and names
// against it rather than against package api's constants, so that a change
// of either side alone — a copied constant, a struct of its own — fails.
package contracttest

import (
	_ "embed"
	"encoding/json"
	"fmt"

	"github.com/gvxrun/gvx/api"
)

//go:embed contract.json
var contractJSON []byte

// Contract is contract.json.
type Contract struct {
	Names      map[string]string `json:"names"`
	ExitKilled int               `json:"exit_killed"`
	Volumes    struct {
		Annotation string       `json:"annotation"`
		Decoded    []api.Volume `json:"decoded"`
	} `json:"volumes"`
	Layout map[string]string `json:"layout"`
}

// Load decodes contract.json.
func Load() (*Contract, error) {
	var c Contract
	if err := json.Unmarshal(contractJSON, &c); err != nil {
		return nil, fmt.Errorf("contract.json: %w", err)
	}
	return &c, nil
}

// Name returns the contract's name key; it panics on a key contract.json
// lacks (a test's typo).
func (c *Contract) Name(key string) string {
	v, ok := c.Names[key]
	if !ok {
		panic("contract.json has no name " + key)
	}
	return v
}
