// Command httpfloor is the floor of BenchmarkHTTPFloor: an echo server that
// answers POST /v1/limiters/{name}/acquire as limitd does when it grants, with
// a body of the same size, and decides nothing. What it costs per request is
// what net/http and echo cost, which no work in limitd's handler can remove.
// It listens on LIMITD_ADDR; any PUT is a 201, so that a test can set it up
// as it sets up limitd.
package main

import (
	"io"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/labstack/echo/v4"
)

// granted is a grant as limitd writes it (wire.Granted), of the same length.
var granted = []byte(`{"granted":true,"permits":1,"delay_ns":0,"scheduled_ns":1795261877984527000,` +
	`"start_ns":1795261877984527000,"lateness_ns":0,"wait_ns":0,"version":1,"now_ns":1795261877984527000}` + "\n")

func main() {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.GET("/healthz", func(c echo.Context) error { return c.String(http.StatusOK, "ok\n") })
	e.PUT("/*", func(c echo.Context) error {
		_, _ = io.Copy(io.Discard, c.Request().Body)
		return c.Blob(http.StatusCreated, echo.MIMEApplicationJSON, []byte("{}\n"))
	})
	e.POST("/v1/limiters/:name/acquire", func(c echo.Context) error {
		if _, err := io.ReadAll(c.Request().Body); err != nil {
			return err
		}
		return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, granted)
	})
	// The same server settings as limitd serve.
	srv := &http.Server{Addr: os.Getenv("LIMITD_ADDR"), Handler: e, ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout: 5 * time.Second, IdleTimeout: 2 * time.Minute}
	log.Fatal(srv.ListenAndServe())
}
