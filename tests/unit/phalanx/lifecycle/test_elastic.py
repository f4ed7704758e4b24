"""lifecycle.elastic: the sizes an elastic job may run at and the job at a given size."""

from __future__ import annotations


def test_elastic_sizes_respect_the_layout(job_obj):
    from phalanx.lifecycle.elastic import runnable_sizes
    from phalanx.validate import parse_job

    job_obj["spec"].update(nodes=4, procsPerNode=4, elastic={"minNodes": 1, "maxNodes": 4}, training={"globalBatchSize": 32})
    # 32 sequences over 4·n data-parallel ranks: n = 3 would need 32 % 12 == 0.
    assert runnable_sizes(parse_job(job_obj), 1, 4) == [4, 2, 1]
