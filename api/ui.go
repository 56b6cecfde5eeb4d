package api

import (
	_ "embed"
	"net/http"

	"github.com/labstack/echo/v4"
)

// uiPage is the dashboard: one page, its script and style inline, no
// third-party code; it reads and changes limiters through the API with the
// token the user types in.
//
//go:embed ui/index.html
var uiPage []byte

// ui serves the dashboard. The page holds no data and no secret: what it
// shows, it reads through the API with the user's token.
func (s *server) ui(c echo.Context) error {
	h := c.Response().Header()
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src 'self' data:")
	return c.Blob(http.StatusOK, "text/html; charset=utf-8", uiPage)
}
