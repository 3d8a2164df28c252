"""The test lab: fault drills, the chaos soak, the benchmark, the simulated outside world
(devices, shop, model, services) and the demo seed. The engine never imports it; the lab
plugs into the engine through the hooks it registers when the app starts."""
