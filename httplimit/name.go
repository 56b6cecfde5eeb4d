package httplimit

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/limitd/limitd"
)

// maxName is the longest limiter name (limitd.CheckName).
const maxName = 128

// limiterName makes a valid limiter name of prefix+key, as WithLimiterPrefix
// tells; a name not starting with a letter or digit gets a leading 'k'.
func limiterName(prefix, key string) string {
	name := prefix + key
	if limitd.CheckName(name) == nil {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	hash := "-" + hex.EncodeToString(sum[:8])
	var b strings.Builder
	for i := 0; i < len(name) && b.Len() < maxName-len(hash)-1; i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case b.Len() > 0 && (c == '.' || c == '_' || c == ':' || c == '-'):
		default:
			if b.Len() == 0 {
				b.WriteByte('k')
			}
			c = '-'
		}
		b.WriteByte(c)
	}
	if b.Len() == 0 {
		b.WriteByte('k')
	}
	return b.String() + hash
}
