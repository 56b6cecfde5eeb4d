package redistest

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// AddUser makes name an ACL user of the server with password, allowed every
// key, channel and command unless rules say otherwise (ACL SETUSER's rules,
// in place of "~*", "&*", "+@all"). Named "default", it gives the default
// user a password (requirepass); the server's own calls here keep working.
// Like t.Fatal it must be called from the test goroutine.
func (i *Instance) AddUser(name, password string, rules ...string) {
	i.t.Helper()
	if len(rules) == 0 {
		rules = []string{"~*", "&*", "+@all"}
	}
	args := []any{"ACL", "SETUSER", name, "on", ">" + password}
	for _, r := range rules {
		args = append(args, r)
	}
	i.admin(args)
	if name == "default" {
		i.adminPassword = password
	}
}

// SetPassword gives user name password in place of its own and closes its
// connections: a password changed under a running client.
func (i *Instance) SetPassword(name, password string) {
	i.t.Helper()
	i.admin([]any{"ACL", "SETUSER", name, "resetpass", ">" + password})
	i.admin([]any{"CLIENT", "KILL", "USER", name})
}

// UserClient is a client of the server as user name with password (both
// empty: the default user, without one) that fails at once rather than
// retry, closed when the test ends.
func (i *Instance) UserClient(name, password string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: i.Addr(), Username: name, Password: password, MaxRetries: -1, DialerRetries: 1})
	i.t.Cleanup(func() { _ = c.Close() })
	return c
}

func (i *Instance) admin(args []any) {
	i.t.Helper()
	c := redis.NewClient(&redis.Options{Addr: i.Addr(), Password: i.adminPassword})
	defer c.Close()
	if err := c.Do(context.Background(), args...).Err(); err != nil {
		i.t.Fatalf("redistest: %v: %v", args, err)
	}
}
