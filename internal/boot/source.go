package boot

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
)

// A Source is where a Keeper reads its configuration again.
type Source interface {
	Where() string // a path, for logs
	// Read reads it once: the sum of what it read, which tells a change,
	// and the parse of that same content.
	Read() (sum string, parse func() (*File, error), err error)
}

// FileSource is the boot file at a path.
type FileSource string

// Where is the path.
func (p FileSource) Where() string { return string(p) }

// Read reads the file.
func (p FileSource) Read() (string, func() (*File, error), error) {
	data, err := os.ReadFile(string(p))
	if err != nil {
		return "", nil, err
	}
	return sumOf(data), func() (*File, error) { return Parse(string(p), data) }, nil
}

func sumOf(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}
