package main

import (
	"context"
	"fmt"
)

// raw measures the service with a plain Go HTTP client speaking the same
// requests as the e2b SDK (create, process.Process/Start of `true`,
// kill: harness.Serve.Cycle): the service's own overhead, without the
// JS SDK's.
func (s *service) raw(ctx context.Context, template string, runs int) (sdkResult, error) {
	var r sdkResult
	cycle := func(res *sdkResult) error {
		if err := s.PoolFull(ctx, template); err != nil {
			return err
		}
		toExec, whole, err := s.Cycle(ctx, template, "/bin/bash", "-l", "-c", "true")
		if err != nil {
			return fmt.Errorf("template %s: %w", template, err)
		}
		res.CreateRun = append(res.CreateRun, ms(toExec))
		res.Cycle = append(res.Cycle, ms(whole))
		return nil
	}
	var warm sdkResult
	if err := cycle(&warm); err != nil {
		return r, err
	}
	for i := 0; i < runs; i++ {
		if err := cycle(&r); err != nil {
			return r, err
		}
	}
	return r, nil
}
