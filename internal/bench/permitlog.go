package bench

import (
	"bufio"
	"cmp"
	"os"
	"strconv"
)

// permitLog writes --log lines from one goroutine: workers hand it full
// batches of records, so a permit costs them an append.
type permitLog struct {
	f    *os.File
	ch   chan []int64 // full batches, to write
	free chan []int64 // written batches, to reuse
	done chan struct{}
	err  error // the first
}

const (
	logBatch  = 4096 // int64s per batch: 2048 permits
	logBuffer = 1 << 20
)

func openPermitLog(path string) (*permitLog, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	l := &permitLog{f: f, ch: make(chan []int64, 64), free: make(chan []int64, 64), done: make(chan struct{})}
	go l.write()
	return l, nil
}

func (l *permitLog) batch() []int64 {
	select {
	case b := <-l.free:
		return b[:0]
	default:
		return make([]int64, 0, logBatch)
	}
}

func (l *permitLog) send(b []int64) {
	if len(b) > 0 {
		l.ch <- b
	}
}

func (l *permitLog) write() {
	defer close(l.done)
	w := bufio.NewWriterSize(l.f, logBuffer)
	line := make([]byte, 0, 48)
	for b := range l.ch {
		for i := 0; i+1 < len(b); i += 2 {
			line = strconv.AppendInt(line[:0], b[i], 10)
			line = append(line, ' ')
			line = strconv.AppendInt(line, b[i+1], 10)
			line = append(line, '\n')
			_, err := w.Write(line)
			l.err = cmp.Or(l.err, err)
		}
		select {
		case l.free <- b:
		default:
		}
	}
	l.err = cmp.Or(l.err, w.Flush())
}

func (l *permitLog) close() error {
	close(l.ch)
	<-l.done
	l.err = cmp.Or(l.err, l.f.Close())
	return l.err
}
