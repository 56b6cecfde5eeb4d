package store

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestNewClientTopologies: each URL form gives its topology, with go-redis'
// own reading of credentials and TLS, and limitd's short timeouts where the
// URL sets none.
func TestNewClientTopologies(t *testing.T) {
	t.Run("sentinel", func(t *testing.T) {
		rdb, err := NewClient("rediss://suser:spw@10.0.0.1:26379/2?master_name=mymaster&addr=10.0.0.2:26380&username=app&password=apppw&read_timeout=2s")
		if err != nil {
			t.Fatal(err)
		}
		defer rdb.Close()
		c, ok := rdb.(*redis.Client)
		if !ok {
			t.Fatalf("sentinel URL gave %T, want *redis.Client (a failover client)", rdb)
		}
		o := c.Options()
		if o.Username != "app" || o.Password != "apppw" || o.DB != 2 || o.TLSConfig == nil {
			t.Errorf("master options: user %q password set %v db %d tls %v", o.Username, o.Password != "", o.DB, o.TLSConfig != nil)
		}
		if o.DialTimeout != DialTimeout || o.WriteTimeout != WriteTimeout || o.ReadTimeout != 2*time.Second || o.MaxRetries != MaxRetries || !o.ContextTimeoutEnabled {
			t.Errorf("timeouts %v %v %v retries %d ctx %v", o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.MaxRetries, o.ContextTimeoutEnabled)
		}
		// A failover client dials through the Sentinels: its Addr is "FailoverClient".
		if !strings.Contains(o.Addr, "Failover") {
			t.Errorf("Addr %q: not a failover client", o.Addr)
		}
	})
	t.Run("cluster", func(t *testing.T) {
		rdb, err := NewClient("rediss://app:pw1234@n1:7000?addr=n2:7001&addr=n3:7002")
		if err != nil {
			t.Fatal(err)
		}
		defer rdb.Close()
		c, ok := rdb.(*redis.ClusterClient)
		if !ok {
			t.Fatalf("cluster URL gave %T", rdb)
		}
		o := c.Options()
		if !slices.Equal(o.Addrs, []string{"n1:7000", "n2:7001", "n3:7002"}) || o.Username != "app" || o.Password != "pw1234" || o.TLSConfig == nil {
			t.Errorf("cluster options: addrs %v user %q tls %v", o.Addrs, o.Username, o.TLSConfig != nil)
		}
		if o.DialTimeout != DialTimeout || o.ReadTimeout != ReadTimeout || o.WriteTimeout != WriteTimeout || o.MaxRetries != MaxRetries || !o.ContextTimeoutEnabled {
			t.Errorf("timeouts %v %v %v retries %d", o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.MaxRetries)
		}
	})
	t.Run("comma in a password", func(t *testing.T) {
		rdb, err := NewClient("redis://u:a,b@127.0.0.1:6390")
		if err != nil {
			t.Fatal(err)
		}
		defer rdb.Close()
		if o := rdb.(*redis.Client).Options(); o.Password != "a,b" {
			t.Errorf("password %q", o.Password)
		}
	})
	t.Run("single", func(t *testing.T) {
		rdb, err := NewClient("redis://localhost")
		if err != nil {
			t.Fatal(err)
		}
		defer rdb.Close()
		if o := rdb.(*redis.Client).Options(); o.Addr != "localhost:6379" {
			t.Errorf("Addr %q, want go-redis' default port", o.Addr)
		}
	})
}

// TestNewClientNeverShowsPasswords: whatever is wrong with a URL, the error
// names the fault and never the password, in any of the places a password
// may be written.
func TestNewClientNeverShowsPasswords(t *testing.T) {
	const pw = "s3cr3t-Pw"
	for _, c := range []struct{ url, names string }{
		{"redis://user:" + pw + "@127.0.0.1:99999", "99999"},
		{"redis://:" + pw + "@127.0.0.1:6390/x", "x"},
		{"redis://user:" + pw + "@127.0.0.1:6390?bogus=1", "bogus"},
		{"redis://user:" + pw + "@127.0.0.1:6390,127.0.0.1:6391", "addr="},
		{"rediss://user:" + pw + "@127.0.0.1:6390?addr=user:" + pw + "@h:1", "addr"},
		{"rediss://user:" + pw + "@127.0.0.1:6390?addr=h:1&bogus=2", "bogus"},
		{"redis://user:" + pw + "@127.0.0.1:6390/3?addr=h:1", "database 0"},
		{"redis://127.0.0.1:26379?master_name=m&password=" + pw + "&bogus=1", "bogus"},
		{"redis://127.0.0.1:26379?master_name=&password=" + pw, "master_name"},
		{"redis://u:" + pw + "@127.0.0.1:26379?master_name=m&addr=" + pw, "addr"},
		{"redis://:" + pw + "@127.0.0.1:6390?addr=x", "redis: unable to parse addr param: x"},
		{"redis://u:" + pw + "@127.0.0.1:26379?master_name=m&sentinel_password=" + pw, "sentinel_password"},
		{"redis://user:" + pw + "@127.0.0.1:notaport", "port"},
		{"redis://user:" + pw + "%zz@127.0.0.1:6390", "escape"},
		{"redis://user:" + pw + "/?#@127.0.0.1:6390", ""},
		{"http://user:" + pw + "@127.0.0.1:6390", `"http"`},
		{"user:" + pw + "@127.0.0.1:6390,127.0.0.1:6391", "address 1"},
		{pw + "@127.0.0.1:6390", "address 1"},
	} {
		rdb, err := NewClient(c.url)
		if err == nil {
			_ = rdb.Close()
			t.Errorf("NewClient(%q) accepted", c.url)
			continue
		}
		var ue *URLError
		if !errors.Is(err, ErrInvalid) || !errors.As(err, &ue) || !strings.Contains(ue.Reason, c.names) {
			t.Errorf("NewClient(%q) = %v; want a *URLError (ErrInvalid) naming %s", c.url, err, c.names)
		}
		if strings.Contains(err.Error(), pw) || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("NewClient(%q) error shows the password: %v", c.url, err)
		}
		if strings.Contains(c.url, "://") && !strings.Contains(err.Error(), "://") {
			t.Errorf("NewClient(%q) error hides more than the password: %v", c.url, err)
		}
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://127.0.0.1:6379/0":                             "redis://127.0.0.1:6379/0",
		"redis://user:pw@h:1/2":                                "redis://user:xxxxx@h:1/2",
		"rediss://:p@ss/w?rd@h:1":                              "rediss://:xxxxx@h:1",
		"redis://s:1?master_name=m&password=pw&addr=s2:2":      "redis://s:1?master_name=m&password=xxxxx&addr=s2:2",
		"redis://s:1?sentinel_password=pw&master_name=m":       "redis://s:1?sentinel_password=xxxxx&master_name=m",
		"redis://pw@h:1":                                       "redis://xxxxx@h:1",
		"h:1,h:2":                                              "h:1,h:2",
		"u:pw@h:1,h:2":                                         "xxxxx@h:1,h:2",
		"redis://n:7000?addr=n2:7001&addr=n3:7002&pool_size=9": "redis://n:7000?addr=n2:7001&addr=n3:7002&pool_size=9",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// NewClientTLS adds what a URL cannot carry (a private CA, a client
// certificate) to a rediss:// URL's TLS, and refuses it on redis://.
func TestNewClientTLS(t *testing.T) {
	pool := x509.NewCertPool()
	rdb, err := NewClientTLS("rediss://127.0.0.1:6380", &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{{}}})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	got := rdb.(*redis.Client).Options().TLSConfig
	if got == nil || got.RootCAs != pool || len(got.Certificates) != 1 || got.ServerName != "127.0.0.1" {
		t.Errorf("TLS config %+v: want the URL's server name with the CA and certificate added", got)
	}
	if _, err := NewClientTLS("redis://127.0.0.1:6380", &tls.Config{}); err == nil || !errors.Is(err, ErrInvalid) {
		t.Errorf("TLS settings on redis://: %v, want ErrInvalid", err)
	}
}
