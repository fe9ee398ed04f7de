package runtime

import (
	"strings"
	"testing"
)

// An engine that holds its experts in device memory (the GPU's) maps no
// expert slots on the host, so its footprint counts none, and says so.
func TestFootprintOfADeviceEngineCountsNoExpertSlots(t *testing.T) {
	registerFakeDevice()
	in, err := OpenInstall(install(t, "tiny-moe-fused", 4))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	cpu, err := ComputeFootprint(in, FootprintOptions{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := ComputeFootprint(in, FootprintOptions{Threads: 1, Device: "fake"})
	if err != nil {
		t.Fatal(err)
	}
	if cpu.ExpertSlots == 0 || cpu.Device != "" {
		t.Fatalf("CPU footprint %+v: want expert slots on the host", cpu)
	}
	if dev.ExpertSlots != 0 || dev.Slots != 0 || dev.Total != cpu.Total-cpu.ExpertSlots {
		t.Errorf("device footprint %+v, CPU %+v: want the CPU's less its expert slots", dev, cpu)
	}
	if !strings.Contains(dev.String(), "fake engine keeps the experts") {
		t.Errorf("device footprint line %q does not say what it leaves out", dev)
	}
}
