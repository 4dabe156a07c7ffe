"""Checks of the run as a set of processes: worker deaths, stalls and restarts (incidents),
samples thrown away or never trained on (sampling), memory that keeps growing (leak),
machine contention across workers (contention) and the driver's own hangs (driver)."""
