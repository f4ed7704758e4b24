"""Parallelism on a device mesh: process group, mesh dimensions, FSDP2/DDP, pipeline, precision."""
