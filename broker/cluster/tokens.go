package cluster

import "sync"

// tokens hands out channels that each receive a token after every later
// notify. Tokens coalesce (one may stand for several notifies) and
// notify never blocks. Every reader takes its own channel: with one
// channel shared, a token one reader took is an event the others never
// hear of.
type tokens struct {
	mu    sync.Mutex
	chans []chan struct{}
}

// subscribe returns a new channel of the tokens.
func (t *tokens) subscribe() <-chan struct{} {
	c := make(chan struct{}, 1)
	t.mu.Lock()
	t.chans = append(t.chans, c)
	t.mu.Unlock()
	return c
}

// notify gives every channel a token (unless it holds one already).
func (t *tokens) notify() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.chans {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}
