package testenv

import (
	"errors"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// StallProduce holds every produce request the in-process broker
// (k.Cluster, which must be set) gets until resume is closed; stalled is
// closed when the first one arrives. Then the held ones land, or with lands
// false fail (the broker answers an error), and the later ones are served
// as usual: what a test needs to act while an event is on its way to Kafka.
func (k Kafka) StallProduce(lands bool) (stalled, resume chan struct{}) {
	stalled, resume = make(chan struct{}), make(chan struct{})
	var once sync.Once
	c := k.Cluster
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		select {
		case <-resume:
			c.DropControl()
			return nil, nil, false
		default:
		}
		c.KeepControl()
		once.Do(func() { close(stalled) })
		c.SleepControl(func() { <-resume })
		if lands {
			return nil, nil, false
		}
		return nil, errors.New("broker was paused"), true
	})
	return stalled, resume
}
