package redistest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// FillMemory writes fill:N keys until Redis refuses with OOM (set maxmemory
// with noeviction first), in ever smaller values, so that even a tiny write is
// refused afterwards: a large write's own query buffer counts while it is
// refused, and is freed after.
func FillMemory(t testing.TB, rdb *redis.Client) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	i := 0
	for _, size := range []int{64 << 10, 1 << 10, 16} {
		v := strings.Repeat("x", size)
		for ; ; i++ {
			err := rdb.Set(context.Background(), fmt.Sprintf("fill:%d", i), v, 0).Err()
			if err != nil && strings.HasPrefix(err.Error(), "OOM") {
				break
			}
			if err != nil || time.Now().After(deadline) {
				t.Fatalf("filling Redis: %v after %d keys", err, i)
			}
		}
	}
}
