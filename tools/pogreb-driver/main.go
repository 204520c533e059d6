// Command pogreb-driver replays an operation stream recorded by
// `tphdb bench` (engine "pogreb") against Pogreb and prints the same JSON
// row the Rust engines produce, so Pogreb runs the exact operations the
// other engines run, timed in its own process.
//
// Stream format (little-endian), one unit per timed operation:
//
//	unit  := label:u8 count:u8 op*      label: the operation kind (see kinds)
//	op    := 1 klen:u32 key vlen:u32 value   put
//	       | 2 klen:u32 key expect:u8        get (expect: 1 if it should exist)
//	       | 3 klen:u32 key                  delete
//	       | 4 klen:u32 key n:u32            scan (unsupported: Pogreb is unordered)
//	marker:= 255 tag:u8                     1 settle, 2 reopen, 3 run starts
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/akrylysov/pogreb"
)

var kinds = []string{"read", "update", "insert", "scan", "rmw", "delete"}

type op struct {
	code   byte
	key    []byte
	value  []byte
	expect bool
}

type unit struct {
	label  byte
	ops    []op
	marker byte
}

// stream reads the recorded units one at a time: the whole stream would
// not fit the memory budget a benchmark gives the engine.
type stream struct {
	f *os.File
	r *bufio.Reader
}

func openStream(path string) (*stream, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	return &stream{f: f, r: bufio.NewReaderSize(f, 1<<20)}, nil
}

func (s *stream) u32() (uint32, error) {
	var b [4]byte
	_, err := io.ReadFull(s.r, b[:])
	return binary.LittleEndian.Uint32(b[:]), err
}

func (s *stream) bytesN() ([]byte, error) {
	n, err := s.u32()
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	_, err = io.ReadFull(s.r, b)
	return b, err
}

// next returns the next unit, or ok == false at the end of the stream.
func (s *stream) next() (u unit, ok bool, err error) {
	label, err := s.r.ReadByte()
	if err == io.EOF {
		return unit{}, false, nil
	}
	if err != nil {
		return unit{}, false, err
	}
	count, err := s.r.ReadByte()
	if err != nil {
		return unit{}, false, err
	}
	if label == 255 {
		return unit{marker: count}, true, nil
	}
	u = unit{label: label}
	for i := 0; i < int(count); i++ {
		code, err := s.r.ReadByte()
		if err != nil {
			return unit{}, false, err
		}
		o := op{code: code}
		if o.key, err = s.bytesN(); err != nil {
			return unit{}, false, err
		}
		switch code {
		case 1:
			o.value, err = s.bytesN()
		case 2:
			var e byte
			e, err = s.r.ReadByte()
			o.expect = e == 1
		case 3:
		case 4:
			return unit{}, false, fmt.Errorf("pogreb has no ordered scans: workloads with scans are not supported")
		default:
			return unit{}, false, fmt.Errorf("unknown op %d", code)
		}
		if err != nil {
			return unit{}, false, err
		}
		u.ops = append(u.ops, o)
	}
	return u, true, nil
}

func procIO() (read, write uint64) {
	read, write, _ = procIOCancelled()
	return
}

// procIOCancelled also returns the bytes dirtied and then truncated or
// deleted before they were written back: they never reached the device.
func procIOCancelled() (read, write, cancelled uint64) {
	b, _ := os.ReadFile("/proc/self/io")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "read_bytes:"); ok {
			read, _ = strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
		if v, ok := strings.CutPrefix(l, "write_bytes:"); ok {
			write, _ = strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
		if v, ok := strings.CutPrefix(l, "cancelled_write_bytes:"); ok {
			cancelled, _ = strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return
}

func peakRSS() uint64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func dirBytes(dir string) uint64 {
	var total uint64
	filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			total += uint64(info.Size())
		}
		return nil
	})
	return total
}

func round(f float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(f*p) / p
}

// latencies holds one operation kind's latencies in nanoseconds.
type latencies []int64

func (l latencies) quantile(q float64) float64 {
	if len(l) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(l)))) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(l) {
		i = len(l) - 1
	}
	return round(float64(l[i])/1000, 2)
}

func (l latencies) mean() float64 {
	if len(l) == 0 {
		return 0
	}
	var s float64
	for _, v := range l {
		s += float64(v)
	}
	return round(s/float64(len(l))/1000, 2)
}

func (l latencies) summary() map[string]any {
	cdf := [][2]float64{}
	for i := 0; i <= 40; i++ {
		q := 1 - math.Pow(10, -float64(i)/10)
		cdf = append(cdf, [2]float64{round(q, 5), l.quantile(q)})
	}
	return map[string]any{
		"count": len(l), "avg_us": l.mean(), "p50_us": l.quantile(0.5),
		"p99_us": l.quantile(0.99), "p999_us": l.quantile(0.999),
		"max_us": l.quantile(1), "cdf": cdf,
	}
}

func run(streamPath, dir string) (map[string]any, error) {
	units, err := openStream(streamPath)
	if err != nil {
		return nil, err
	}
	defer units.f.Close()
	// Pogreb's defaults, with its background sync off: like the other
	// engines, no sync per write; a settle syncs.
	open := func() (*pogreb.DB, error) { return pogreb.Open(dir, &pogreb.Options{}) }
	db, err := open()
	if err != nil {
		return nil, err
	}
	r0, w0, c0 := procIOCancelled()
	var r1 uint64
	byKind := map[byte]latencies{}
	var all latencies
	perSecond := []int64{}
	var loadOps, runOps, unexpected, userRead, userWritten int64
	running := false
	start := time.Now()
	runStart := start
	tick := start
	var loadEnd time.Time
	var lastCount int64
	for {
		u, ok, err := units.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		if u.marker != 0 {
			if !running && loadEnd.IsZero() {
				loadEnd = time.Now()
			}
			switch u.marker {
			case 1:
				if err := db.Sync(); err != nil {
					return nil, err
				}
			case 2:
				if err := db.Close(); err != nil {
					return nil, err
				}
				if db, err = open(); err != nil {
					return nil, err
				}
			case 3:
				running = true
				r1, _ = procIO()
				runStart = time.Now()
				tick = runStart
			}
			continue
		}
		t0 := time.Now()
		for _, o := range u.ops {
			switch o.code {
			case 1:
				if err := db.Put(o.key, o.value); err != nil {
					return nil, err
				}
				userWritten += int64(len(o.key) + len(o.value))
			case 2:
				v, err := db.Get(o.key)
				if err != nil {
					return nil, err
				}
				if (v != nil) != o.expect {
					unexpected++
				}
				if running {
					userRead += int64(len(o.key) + len(v))
				}
			case 3:
				if err := db.Delete(o.key); err != nil {
					return nil, err
				}
				userWritten += int64(len(o.key))
			}
		}
		ns := time.Since(t0).Nanoseconds()
		if !running {
			loadOps++
			continue
		}
		runOps++
		byKind[u.label] = append(byKind[u.label], ns)
		all = append(all, ns)
		if time.Since(tick) >= time.Second {
			tick = tick.Add(time.Second)
			perSecond = append(perSecond, runOps-lastCount)
			lastCount = runOps
		}
	}
	runSecs := time.Since(runStart).Seconds()
	loadSecs := loadEnd.Sub(start).Seconds()
	r2, _ := procIO()
	if err := db.Sync(); err != nil {
		return nil, err
	}
	_, w3, c3 := procIOCancelled()
	if err := db.Close(); err != nil {
		return nil, err
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	lat := map[string]any{}
	for k, l := range byKind {
		sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
		name := "op"
		if int(k) < len(kinds) {
			name = kinds[k]
		}
		lat[name] = l.summary()
	}
	row := map[string]any{
		"engine":      "pogreb",
		"ops_per_sec": round(float64(runOps)/math.Max(runSecs, 1e-9), 0),
		"avg_us":      all.mean(),
		"p50_us":      all.quantile(0.5),
		"p99_us":      all.quantile(0.99),
		"p999_us":     all.quantile(0.999),
		// Pogreb does not count its own writes: only what the device got.
		"device_write_amp":   round(float64(w3-w0-(c3-c0))/math.Max(float64(userWritten), 1), 2),
		"device_written_mb":  round(float64(w3-w0-(c3-c0))/1e6, 1),
		"read_amp":           nil,
		"disk_read_mb":       round(float64(r2-r0)/1e6, 1),
		"disk_written_mb":    round(float64(w3-w0)/1e6, 1),
		"space_mb":           round(float64(dirBytes(dir))/1e6, 1),
		"peak_rss_mb":        round(float64(peakRSS())/1e6, 1),
		"unexpected_reads":   unexpected,
		"ops":                runOps,
		"latency":            lat,
		"throughput_per_sec": perSecond,
	}
	// Without user reads (fills, deletes) there is nothing to amplify.
	if userRead > 0 {
		row["read_amp"] = round(float64(r2-r1)/float64(userRead), 2)
	}
	if loadOps > 0 {
		row["load_ops_per_sec"] = round(float64(loadOps)/math.Max(loadSecs, 1e-9), 0)
	}
	return row, nil
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: pogreb-driver STREAM DIR")
		os.Exit(2)
	}
	row, err := run(os.Args[1], os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "pogreb-driver:", err)
		os.Exit(1)
	}
	out, _ := json.Marshal(row)
	fmt.Println(string(out))
}
