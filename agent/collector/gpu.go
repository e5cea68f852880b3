package collector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// gpuQuery is the nvidia-smi --query-gpu list; parseNvidiaSMI expects its
// columns in this order.
const gpuQuery = "index,uuid,name,utilization.gpu,utilization.memory,memory.used,memory.total,temperature.gpu,power.draw"

const (
	gpuColumns = 9
	// gpuMissingRetry is how long a missing nvidia-smi is not looked for again.
	gpuMissingRetry = 5 * time.Minute
	// A failing nvidia-smi (driver not loaded, a hung GPU) is retried after
	// gpuMinBackoff, doubling to gpuMaxBackoff, so a node with a sick GPU
	// does not spend GPUTimeout on every Collect.
	gpuMinBackoff = 30 * time.Second
	gpuMaxBackoff = 10 * time.Minute
	// gpuWaitDelay bounds the wait for nvidia-smi's output pipes after it was
	// killed (a child holding them open must not stall Collect).
	gpuWaitDelay = 250 * time.Millisecond
)

// gpuValueKeys are Telegraf's nvidia_smi field names for columns 3..8; all
// but power_draw are integers (percent, MiB, degrees C; power in W).
var gpuValueKeys = [gpuColumns - 3]string{"utilization_gpu", "utilization_memory", "memory_used", "memory_total", "temperature_gpu", "power_draw"}

// gpuRow is one GPU as nvidia-smi printed it. A value is NaN when
// nvidia-smi printed "[N/A]", "[Not Supported]" or nothing parseable.
type gpuRow struct {
	index, uuid, name string
	vals              [gpuColumns - 3]float64
}

// parseNvidiaSMI parses the output of
// nvidia-smi --query-gpu=<gpuQuery> --format=csv,noheader,nounits:
// one line per GPU, columns separated by ", ". A GPU name containing commas
// is put back together from the columns between uuid and the six values.
func parseNvidiaSMI(out []byte, dst []gpuRow) []gpuRow {
	dst = dst[:0]
	for len(out) > 0 {
		var line []byte
		line, out = nextLine(out)
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		cols := strings.Split(string(line), ",")
		if len(cols) < gpuColumns {
			continue
		}
		vals := cols[len(cols)-(gpuColumns-3):]
		row := gpuRow{
			index: strings.TrimSpace(cols[0]),
			uuid:  strings.TrimSpace(cols[1]),
			name:  strings.TrimSpace(strings.Join(cols[2:len(cols)-(gpuColumns-3)], ",")),
		}
		if row.index == "" {
			continue
		}
		for i, v := range vals {
			row.vals[i] = math.NaN()
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && !math.IsInf(f, 0) {
				row.vals[i] = f
			}
		}
		dst = append(dst, row)
	}
	return dst
}

type gpuState struct {
	path    string    // resolved nvidia-smi, "" until found
	next    time.Time // no attempt before this
	backoff time.Duration
	rows    []gpuRow
}

// collectGPULocked runs nvidia-smi and writes one gpu line per GPU.
func (c *Collector) collectGPULocked(ctx context.Context, now time.Time) {
	g := &c.mu.gpu
	if now.Before(g.next) {
		return
	}
	if g.path == "" {
		p, err := exec.LookPath(c.cfg.NvidiaSMI)
		if err != nil {
			g.next = now.Add(gpuMissingRetry)
			c.failLocked(srcGPU, fmt.Errorf("no nvidia-smi, skipping GPUs: %w", err))
			return
		}
		g.path = p
	}

	out, err := c.runNvidiaSMI(ctx, g.path)
	if ctx.Err() != nil {
		return // the caller gave up; not the GPU's fault
	}
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) { // removed since LookPath
			g.path = ""
		}
		g.backoff = min(max(2*g.backoff, gpuMinBackoff), gpuMaxBackoff)
		g.next = now.Add(g.backoff)
		c.failLocked(srcGPU, err)
		return
	}
	g.backoff = 0
	c.okLocked(srcGPU)

	g.rows = parseNvidiaSMI(out, g.rows)
	for i := range g.rows {
		r := &g.rows[i]
		c.beginLocked("gpu")
		c.mu.enc.AddTag("index", tagValue(r.index))
		if r.name != "" {
			c.mu.enc.AddTag("name", tagValue(r.name))
		}
		if r.uuid != "" {
			c.mu.enc.AddTag("uuid", tagValue(r.uuid))
		}
		for j, v := range r.vals {
			switch {
			case math.IsNaN(v):
			case gpuValueKeys[j] == "power_draw":
				c.addFloat(gpuValueKeys[j], v)
			default:
				c.addInt(gpuValueKeys[j], int64(math.Round(math.Max(math.Min(v, math.MaxInt32), math.MinInt32))))
			}
		}
		c.endLocked(now)
	}
}

// runNvidiaSMI runs nvidia-smi with Config.GPUTimeout and returns stdout.
func (c *Collector) runNvidiaSMI(ctx context.Context, path string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.GPUTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "--query-gpu="+gpuQuery, "--format=csv,noheader,nounits")
	cmd.WaitDelay = gpuWaitDelay
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w after %v", ctx.Err(), c.cfg.GPUTimeout)
		}
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(string(out))
		}
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return nil, fmt.Errorf("run %s: %w: %s", path, err, msg)
	}
	return out, nil
}
