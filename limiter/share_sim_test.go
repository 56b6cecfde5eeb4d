package limiter

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// A deterministic simulation of Doorman's scenario seven against the share
// engine, in virtual time (no sleeping). Doorman's setup (simulation/
// scenario_five.py and scenario_seven.py): 45 clients in a tree of 3 regions
// × 3 datacenters × 5 clients, capacity 500, every client wanting 14 at first,
// its wants then changing by up to ±10% every 10 s; every minute a random
// mishap (a client spiking by +100, a server crash); one simulated hour.
// Doorman reported 96.6% of the capacity handed out on average (after the
// startup learning mode) and overshoot to 530.24 (106.05%).
//
// Here limitd has no tree: every client asks the engine directly, every
// refresh interval (5 s ± 10%) with wants = its current demand, and holds what
// it got (its lease) until it asks again. Every minute a client spikes with
// probability ½, by +100 for 1 to 5 minutes. Half way, Redis restarts without
// persistence: the ShareState is replaced by a fresh one and the clients,
// still reporting what they hold, put it in learning mode.
//
// Measured, sampled every second (excluding nothing unless said):
//   - util: Σ has / min(capacity, Σ wants), has being the clients' unexpired
//     leases and wants their current demand — Doorman's "capacity handed out";
//   - used: Σ min(has, wants) / min(capacity, Σ wants) — what clients can use
//     of what they hold. Never above 1 in a sample while Σ has ≤ capacity, so
//     a client holding more than it now wants cannot hide another's
//     shortfall: the stricter figure;
//   - worst_over: max Σ has / capacity, checked after every request.
//
// The shortfall 1 − used splits exactly into unclaimed (min(capacity, Σ wants)
// − Σ has: capacity nobody holds) and held_unused (Σ max(0, has − wants):
// capacity held by clients whose demand fell since they last asked).
//
// Run: go test -run Sim -v ./limiter/ — every run prints one line starting
// "SIM " with its figures, in a stable format.

const (
	simSecond    = int64(1e9)
	simEpsilon   = 1e-9
	simUtilGoal  = 0.99
	simSpike     = 100.0
	simWalkEvery = 10 * simSecond // Doorman: wants change by up to ±10% every 10 s
	simWalkStep  = 0.1
)

// simConfig is one simulated run.
type simConfig struct {
	alg       Algorithm
	seed      uint64
	clients   int
	capacity  float64
	start     float64 // every client's initial demand
	duration  int64
	refresh   int64
	jitter    float64 // a client asks again after refresh × (1 ± jitter)
	lease     int64
	spikeProb float64 // the chance every minute that a client spikes
	restartAt int64   // the state is lost (Redis restart without persistence); 0: never
	dropAt    int64   // the capacity is lowered to dropTo; 0: never
	dropTo    float64

	// The proposed changes; both off in the scenario as specified.
	askOnChange bool  // client: ask again as soon as the demand changes
	owedRefresh int64 // engine: a client granted less than its share asks again after this; 0: off
}

func scenarioSeven(alg Algorithm) simConfig {
	return simConfig{
		alg: alg, seed: 7, clients: 45, capacity: 500, start: 14,
		duration: 3600 * simSecond, refresh: 5 * simSecond, jitter: 0.1, lease: 60 * simSecond,
		spikeProb: 0.5, restartAt: 1800 * simSecond,
	}
}

// simResult are a run's figures.
type simResult struct {
	cfg                 simConfig
	samples             int
	util, used          float64 // means over all samples
	utilNL, usedNL      float64 // the same, the learning period excluded
	usedLearning        float64 // mean used during the learning period
	unclaimed, heldIdle float64 // mean shortfall parts, fractions of min(C, Σ wants)
	minUsed             float64
	below               int     // samples whose used figure is below the goal
	overloaded          float64 // the fraction of samples with Σ wants > capacity
	worstOver           float64 // max Σ has / the capacity in force
	requests, spikes    int
	learnFrom, learnTo  int64
	learnSamples        int

	// After the capacity drop.
	dropAllAsked  int64   // when every client had asked again
	dropOverUntil int64   // the last time Σ has exceeded the new capacity
	dropWorst     float64 // max Σ has / new capacity
	dropStarved   int     // clients granted 0 while wanting more, until all had asked
	dropUnder     int64   // the first sample with Σ has ≤ new capacity
	dropUsed10s   float64 // mean used in the 10 s from then

	violations []string
}

type simClient struct {
	id      string
	base    float64 // the random-walk demand
	spike   float64 // simSpike while spiking
	has     float64
	expires int64
	next    int64 // the pending refresh; an event for another time is stale
	askedAt int64
}

func (c *simClient) demand() float64 { return c.base + c.spike }

func (c *simClient) holds(now int64) float64 {
	if now >= c.expires {
		return 0
	}
	return c.has
}

type simEventKind int

const (
	simRefresh simEventKind = iota
	simWalk
	simMishap
	simSpikeEnd
	simRestart
	simDrop
)

type simEvent struct {
	at     int64
	seq    int // ties run in the order they were scheduled
	kind   simEventKind
	client int
}

type simQueue []simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

func runShareSim(cfg simConfig) simResult {
	// Two streams, demand and client timing, so that every variant of a
	// scenario sees the same demand whenever its clients ask.
	demandRNG := rand.New(rand.NewPCG(cfg.seed, 1))
	timingRNG := rand.New(rand.NewPCG(cfg.seed, 2))
	uniform := func(rng *rand.Rand, lo, hi float64) float64 { return lo + (hi-lo)*rng.Float64() }

	p := ShareParams{Capacity: cfg.capacity, Algorithm: cfg.alg, Lease: cfg.lease,
		Refresh: cfg.refresh, Learning: cfg.lease}
	s := &ShareState{}
	res := simResult{cfg: cfg, minUsed: math.Inf(1), learnFrom: -1, learnTo: -1,
		dropAllAsked: -1, dropOverUntil: -1, dropUnder: -1}
	starved := map[string]bool{}

	var q simQueue
	seq := 0
	push := func(at int64, kind simEventKind, client int) {
		seq++
		heap.Push(&q, simEvent{at: at, seq: seq, kind: kind, client: client})
	}

	clients := make([]*simClient, cfg.clients)
	for i := range clients {
		id := fmt.Sprintf("r%d/dc%d/c%d", i/15+1, i/5%3+1, i%5+1) // Doorman's tree, flattened
		clients[i] = &simClient{id: id, base: cfg.start, askedAt: -1}
		clients[i].next = int64(uniform(timingRNG, 0, float64(cfg.refresh)))
		push(clients[i].next, simRefresh, i)
		push(int64(uniform(demandRNG, 0, float64(simWalkEvery))), simWalk, i)
	}
	for t := 60 * simSecond; t < cfg.duration; t += 60 * simSecond {
		push(t, simMishap, -1)
	}
	if cfg.restartAt > 0 {
		push(cfg.restartAt, simRestart, -1)
	}
	if cfg.dropAt > 0 {
		push(cfg.dropAt, simDrop, -1)
	}
	dropWindow := func(now int64) bool { // over-allocation is allowed then
		return cfg.dropAt > 0 && now >= cfg.dropAt && res.dropAllAsked < 0
	}

	checkOver := func(now int64) {
		var sum float64
		for _, c := range clients {
			sum += c.holds(now)
		}
		res.worstOver = max(res.worstOver, sum/p.Capacity)
		if cfg.dropAt > 0 && now >= cfg.dropAt {
			res.dropWorst = max(res.dropWorst, sum/p.Capacity)
			if sum > p.Capacity+simEpsilon {
				res.dropOverUntil = now
			}
		}
		if sum > p.Capacity+simEpsilon && !dropWindow(now) && len(res.violations) < 5 {
			res.violations = append(res.violations,
				fmt.Sprintf("t=%.3fs Σ has %.6f > capacity %g", float64(now)/1e9, sum, p.Capacity))
		}
	}

	ask := func(i int, now int64) {
		c := clients[i]
		r := ShareRequest{Client: c.id, Wants: c.demand()}
		l := p.Request(s, now, r, c.holds(now))
		res.requests++
		if l.Learning {
			res.learnFrom, res.learnTo = cfg.restartAt, s.LearningUntil
		}
		if dropWindow(now) && l.Gets == 0 && r.Wants > 0 {
			starved[c.id] = true
		}
		refresh := l.Refresh
		if cfg.owedRefresh > 0 && !l.Learning {
			// The proposal, done here as the engine would: a client granted
			// less than the algorithm's answer, because others still hold
			// it, is told to come back soon instead of a whole interval.
			others := make(Holdings, len(s.Holdings))
			for id, h := range s.Holdings {
				if id != c.id {
					others[id] = h
				}
			}
			if share := algorithms[p.Algorithm](p.Capacity, others, r); l.Gets < share-simEpsilon {
				refresh = cfg.owedRefresh
			}
		}
		c.has, c.expires, c.askedAt = l.Gets, l.Expires, now
		c.next = now + int64(float64(refresh)*uniform(timingRNG, 1-cfg.jitter, 1+cfg.jitter))
		push(c.next, simRefresh, i)
		if dropWindow(now) {
			all := true
			for _, o := range clients {
				all = all && o.askedAt >= cfg.dropAt
			}
			if all {
				res.dropAllAsked = now
			}
		}
		checkOver(now)
	}
	demandChanged := func(i int, now int64) {
		if cfg.askOnChange {
			ask(i, now)
		}
	}

	handle := func(e simEvent) {
		switch e.kind {
		case simRefresh:
			if e.at == clients[e.client].next {
				ask(e.client, e.at)
			}
		case simWalk:
			c := clients[e.client]
			c.base = max(0, c.base*(1+simWalkStep*uniform(demandRNG, -1, 1)))
			push(e.at+simWalkEvery, simWalk, e.client)
			demandChanged(e.client, e.at)
		case simMishap:
			if demandRNG.Float64() >= cfg.spikeProb {
				return
			}
			i := demandRNG.IntN(len(clients))
			if clients[i].spike > 0 {
				return
			}
			clients[i].spike = simSpike
			res.spikes++
			push(e.at+int64(uniform(demandRNG, 60, 300)*1e9), simSpikeEnd, i)
			demandChanged(i, e.at)
		case simSpikeEnd:
			clients[e.client].spike = 0
			demandChanged(e.client, e.at)
		case simRestart:
			s = &ShareState{} // Redis restarted without persistence
		case simDrop:
			p.Capacity = cfg.dropTo
			checkOver(e.at)
		}
	}

	var sumUtil, sumUsed, sumUtilNL, sumUsedNL, sumUsedL, sumUnclaimed, sumHeld, overloaded float64
	var drop10 int
	for now := simSecond; now <= cfg.duration; now += simSecond {
		for q.Len() > 0 && q[0].at <= now {
			handle(heap.Pop(&q).(simEvent))
		}
		var has, wants, used, held float64
		for _, c := range clients {
			h, d := c.holds(now), c.demand()
			has, wants, used, held = has+h, wants+d, used+min(h, d), held+max(0, h-d)
		}
		den := min(p.Capacity, wants)
		if den <= 0 {
			continue
		}
		if wants > p.Capacity {
			overloaded++
		}
		res.samples++
		u, v := has/den, used/den
		sumUtil, sumUsed = sumUtil+u, sumUsed+v
		sumUnclaimed, sumHeld = sumUnclaimed+(den-has)/den, sumHeld+held/den
		res.minUsed = min(res.minUsed, v)
		if v < simUtilGoal {
			res.below++
		}
		if res.learnFrom >= 0 && now >= res.learnFrom && now < res.learnTo {
			res.learnSamples++
			sumUsedL += v
		} else {
			sumUtilNL, sumUsedNL = sumUtilNL+u, sumUsedNL+v
		}
		if cfg.dropAt > 0 && now > cfg.dropAt && res.dropUnder < 0 && has <= p.Capacity+simEpsilon {
			res.dropUnder = now
		}
		if res.dropUnder > 0 && now < res.dropUnder+10*simSecond {
			drop10++
			res.dropUsed10s += v
		}
	}
	n, nl := float64(res.samples), float64(res.samples-res.learnSamples)
	res.util, res.used = sumUtil/n, sumUsed/n
	res.utilNL, res.usedNL = sumUtilNL/nl, sumUsedNL/nl
	if res.learnSamples > 0 {
		res.usedLearning = sumUsedL / float64(res.learnSamples)
	}
	res.unclaimed, res.heldIdle = sumUnclaimed/n, sumHeld/n
	res.overloaded = overloaded / n
	res.dropStarved = len(starved)
	if drop10 > 0 {
		res.dropUsed10s /= float64(drop10)
	}
	return res
}

func (r simResult) variant() string {
	var v []string
	if r.cfg.askOnChange {
		v = append(v, "ask-on-change")
	}
	if r.cfg.owedRefresh > 0 {
		v = append(v, fmt.Sprintf("owed-refresh-%gs", float64(r.cfg.owedRefresh)/1e9))
	}
	if len(v) == 0 {
		return "as-is"
	}
	return strings.Join(v, "+")
}

func simPct(x float64) string { return fmt.Sprintf("%.3f%%", 100*x) }

func simSecs(ns int64) string { return fmt.Sprintf("%.3fs", float64(ns)/1e9) }

// line is the stable "SIM " line the README quotes.
func (r simResult) line(scenario string) string {
	line := fmt.Sprintf("SIM scenario=%s alg=%s variant=%s seed=%d clients=%d capacity=%g start=%g seconds=%d"+
		" util=%s used=%s util_excl_learning=%s used_excl_learning=%s used_learning=%s worst_over=%s"+
		" unclaimed=%s held_unused=%s min_used=%s below99=%d/%d overloaded=%s requests=%d spikes=%d",
		scenario, r.cfg.alg, r.variant(), r.cfg.seed, r.cfg.clients, r.cfg.capacity, r.cfg.start,
		r.cfg.duration/simSecond, simPct(r.util), simPct(r.used), simPct(r.utilNL), simPct(r.usedNL),
		simPct(r.usedLearning), simPct(r.worstOver), simPct(r.unclaimed), simPct(r.heldIdle), simPct(r.minUsed),
		r.below, r.samples, simPct(r.overloaded), r.requests, r.spikes)
	if r.cfg.dropAt > 0 {
		line += fmt.Sprintf(" drop=%g->%g drop_at=%ds all_asked_after=%s over_for=%s drop_worst=%s"+
			" starved_clients=%d used_10s_after=%s",
			r.cfg.capacity, r.cfg.dropTo, r.cfg.dropAt/simSecond, simSecs(r.dropAllAsked-r.cfg.dropAt),
			simSecs(max(r.dropOverUntil-r.cfg.dropAt, 0)), simPct(r.dropWorst), r.dropStarved, simPct(r.dropUsed10s))
	}
	return line
}

func (r simResult) report(t *testing.T, scenario string) {
	t.Helper()
	t.Logf("%s %s (%s): %d samples, Σ wants > capacity in %s of them, %d requests, %d spikes",
		scenario, r.cfg.alg, r.variant(), r.samples, simPct(r.overloaded), r.requests, r.spikes)
	t.Logf("handed out %s on average; used %s, worst second %s, %d seconds below %s",
		simPct(r.util), simPct(r.used), simPct(r.minUsed), r.below, simPct(simUtilGoal))
	if r.learnSamples > 0 {
		t.Logf("learning %s–%s: used %s during it, %s excluding it (handed out %s)",
			simSecs(r.learnFrom), simSecs(r.learnTo), simPct(r.usedLearning), simPct(r.usedNL), simPct(r.utilNL))
	}
	t.Logf("shortfall: unclaimed %s + held but unused %s; worst over-allocation %s of capacity",
		simPct(r.unclaimed), simPct(r.heldIdle), simPct(r.worstOver))
	if r.cfg.dropAt > 0 {
		t.Logf("capacity %g → %g at %s: every client asked again within %s, Σ has above it for %s"+
			" (worst %s); %d clients granted 0 meanwhile; used %s in the 10 s from then",
			r.cfg.capacity, r.cfg.dropTo, simSecs(r.cfg.dropAt), simSecs(r.dropAllAsked-r.cfg.dropAt),
			simSecs(max(r.dropOverUntil-r.cfg.dropAt, 0)), simPct(r.dropWorst), r.dropStarved, simPct(r.dropUsed10s))
	}
	fmt.Println(r.line(scenario))
	for _, v := range r.violations {
		t.Errorf("over-allocation: %s", v)
	}
}

var simAlgorithms = []Algorithm{AlgorithmFair, AlgorithmProportional}

// TestShareSimScenarioSeven: scenario seven with the engine as it is. The
// goals: Σ has ≤ capacity always, and ≥ 99% of the capacity handed out and
// used, over all samples (startup and learning included). Seed 7 was fixed
// before any run. The used figure meets the goal with little to spare: over
// seeds 1–10 it ranged 99.00–99.46% (fair_share; one seed at 98.997%) and
// 99.02–99.44% (proportional_share) when this was written, handed out ≥ 99.49%.
func TestShareSimScenarioSeven(t *testing.T) {
	for _, alg := range simAlgorithms {
		t.Run(string(alg), func(t *testing.T) {
			r := runShareSim(scenarioSeven(alg))
			r.report(t, "seven")
			if r.util < simUtilGoal || r.used < simUtilGoal {
				t.Errorf("handed out %s, used %s of the capacity; goal %s", simPct(r.util), simPct(r.used), simPct(simUtilGoal))
			}
		})
	}
}

// TestShareSimAtCapacity runs scenario seven with demand starting at 10
// (Σ 450, above the capacity only with spikes and drift: two thirds of the time),
// for half an hour without restart. There every change of demand moves
// capacity between clients, and with the engine as it is the used figure
// falls short of 99% (98.7–99.1% over seeds 1–10, when this was written):
// a client whose demand falls holds its lease until its
// next refresh (held_unused), and what it then gives up waits, unclaimed,
// until the clients owed it ask again, up to one refresh interval later.
// The as-is figure is reported, not asserted; the goal is asserted on the
// proposal: clients ask again as soon as their demand changes (the README's share limiter:
// a client may ask at any time) and the engine tells a client granted less
// than its share to ask again after 1 s instead of refresh_interval.
func TestShareSimAtCapacity(t *testing.T) {
	for _, alg := range simAlgorithms {
		for _, proposal := range []bool{false, true} {
			cfg := scenarioSeven(alg)
			cfg.start, cfg.duration, cfg.restartAt = 10, 1800*simSecond, 0
			if proposal {
				cfg.askOnChange, cfg.owedRefresh = true, simSecond
			}
			name := string(alg) + "/as-is"
			if proposal {
				name = string(alg) + "/proposal"
			}
			t.Run(name, func(t *testing.T) {
				r := runShareSim(cfg)
				r.report(t, "at-capacity")
				if proposal && (r.util < simUtilGoal || r.used < simUtilGoal) {
					t.Errorf("proposal: handed out %s, used %s; goal %s", simPct(r.util), simPct(r.used), simPct(simUtilGoal))
				}
			})
		}
	}
}

// TestShareSimCapacityDrop lowers the capacity from 500 to 300 mid-run: Σ has
// may exceed the new capacity only until every client has asked again (one
// refresh interval plus jitter), never after.
func TestShareSimCapacityDrop(t *testing.T) {
	for _, alg := range simAlgorithms {
		t.Run(string(alg), func(t *testing.T) {
			cfg := scenarioSeven(alg)
			cfg.duration, cfg.restartAt, cfg.dropAt, cfg.dropTo = 900*simSecond, 0, 600*simSecond, 300
			r := runShareSim(cfg)
			r.report(t, "capacity-drop") // reports any Σ has > 300 after every client asked again
			bound := int64(float64(cfg.refresh) * (1 + cfg.jitter))
			switch {
			case r.dropAllAsked < 0:
				t.Fatalf("not every client asked again after the drop")
			case r.dropAllAsked-cfg.dropAt > bound:
				t.Errorf("every client had asked again only %s after the drop, bound %s",
					simSecs(r.dropAllAsked-cfg.dropAt), simSecs(bound))
			case r.dropOverUntil > r.dropAllAsked:
				t.Errorf("Σ has above the new capacity at %s, after every client had asked again (%s)",
					simSecs(r.dropOverUntil), simSecs(r.dropAllAsked))
			}
		})
	}
}
