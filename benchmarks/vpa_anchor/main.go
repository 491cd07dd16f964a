// vpa-anchor feeds recorded usage samples through the Kubernetes VPA recommender's own model
// and logic packages (k8s.io/autoscaler/vertical-pod-autoscaler) and prints the recommendation
// VPA would give: target, lower and upper bound for cpu and memory. It is the anchor the
// pykatalyst recommender benchmark compares against; no metrics client or cluster is involved.
//
// Protocol: one command per line on stdin, answers on stdout (flushed after each Q and H).
//
//	N <id>                       start a new container (VPA's default configuration)
//	S <unix_s> <cores> <bytes>   one usage sample: cpu mean and memory peak over the interval
//	O <unix_s> <request_bytes>   an OOM kill of the container at that memory request
//	Q <unix_s>                   ask for the recommendation now
//	H <half_life_s> <p> <kind> <n> then n lines "<value> <weight> <unix_s>"
//	                             build VPA's decaying histogram (kind cpu|memory), print p
//
// Answer to Q: "R <id> <unix_s> <target_cores> <lower_cores> <upper_cores> <target_bytes>
// <lower_bytes> <upper_bytes>". Answer to H: "P <value>".
package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/config"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/logic"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/model"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/util"
)

type container struct {
	id        string
	aggregate *model.AggregateContainerState
	state     *model.ContainerState
}

func newContainer(id string) *container {
	aggregate := model.NewAggregateContainerState()
	return &container{id: id, aggregate: aggregate, state: model.NewContainerState(model.Resources{}, aggregate)}
}

func recommender() logic.PodResourceRecommender {
	c := config.DefaultRecommenderConfig()
	return logic.CreatePodResourceRecommender(logic.RecommendationConfig{
		SafetyMarginFraction:       c.SafetyMarginFraction,
		PodMinCPUMillicores:        c.PodMinCPUMillicores,
		PodMinMemoryMb:             c.PodMinMemoryMb,
		TargetCPUPercentile:        c.TargetCPUPercentile,
		LowerBoundCPUPercentile:    c.LowerBoundCPUPercentile,
		UpperBoundCPUPercentile:    c.UpperBoundCPUPercentile,
		ConfidenceIntervalCPU:      c.ConfidenceIntervalCPU,
		TargetMemoryPercentile:     c.TargetMemoryPercentile,
		LowerBoundMemoryPercentile: c.LowerBoundMemoryPercentile,
		UpperBoundMemoryPercentile: c.UpperBoundMemoryPercentile,
		ConfidenceIntervalMemory:   c.ConfidenceIntervalMemory,
	})
}

func unix(s string) time.Time {
	f := number(s)
	sec := int64(f)
	return time.Unix(sec, int64((f-float64(sec))*1e9)).UTC()
}

func number(s string) float64 {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vpa-anchor: bad number %q: %v\n", s, err)
		os.Exit(2)
	}
	return f
}

func histogram(in *bufio.Scanner, out *bufio.Writer, f []string) {
	halfLife := time.Duration(number(f[1]) * float64(time.Second))
	options := model.GetAggregationsConfig().CPUHistogramOptions
	if f[3] == "memory" {
		options = model.GetAggregationsConfig().MemoryHistogramOptions
	}
	h := util.NewDecayingHistogram(options, halfLife)
	n := int(number(f[4]))
	for i := 0; i < n && in.Scan(); i++ {
		s := strings.Fields(in.Text())
		h.AddSample(number(s[0]), number(s[1]), unix(s[2]))
	}
	fmt.Fprintf(out, "P %.17g\n", h.Percentile(number(f[2])))
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	rec := recommender()
	var c *container
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "N":
			c = newContainer(f[1])
		case "S":
			t := unix(f[1])
			c.state.AddSample(&model.ContainerUsageSample{MeasureStart: t, Usage: model.CPUAmountFromCores(number(f[2])), Resource: model.ResourceCPU})
			c.state.AddSample(&model.ContainerUsageSample{MeasureStart: t, Usage: model.MemoryAmountFromBytes(number(f[3])), Resource: model.ResourceMemory})
		case "O":
			// An OOM too old for the current window is discarded by VPA itself.
			_ = c.state.RecordOOM(unix(f[1]), model.MemoryAmountFromBytes(number(f[2])))
		case "Q":
			r := rec.GetRecommendedPodResources(model.ContainerNameToAggregateStateMap{"c": c.aggregate})["c"]
			fmt.Fprintf(out, "R %s %s %.6f %.6f %.6f %d %d %d\n", c.id, f[1],
				model.CoresFromCPUAmount(r.Target[model.ResourceCPU]),
				model.CoresFromCPUAmount(r.LowerBound[model.ResourceCPU]),
				model.CoresFromCPUAmount(r.UpperBound[model.ResourceCPU]),
				int64(r.Target[model.ResourceMemory]), int64(r.LowerBound[model.ResourceMemory]),
				int64(r.UpperBound[model.ResourceMemory]))
			out.Flush()
		case "H":
			histogram(in, out, f)
			out.Flush()
		default:
			fmt.Fprintf(os.Stderr, "vpa-anchor: unknown command %q\n", f[0])
			os.Exit(2)
		}
	}
}
