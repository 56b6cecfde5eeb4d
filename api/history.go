package api

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/limitd/limitd/wire"
)

// history answers GET /v1/history?limiters=a,b: each limiter's signals,
// oldest first, as Handler.Run sampled them, from this limitd's memory (no
// Redis call). A limiter not sampled has an empty list.
func (s *server) history(c echo.Context) error {
	names, err := limiterNames(c.QueryParam("limiters"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, wire.History{Step: int64(signalStep), Limiters: s.sig.history(names)})
}
