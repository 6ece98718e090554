"""prepare's benchmarks and models, beside the product (which never imports them), as train/bench/:

    python -m prepare.bench --source DIR --scratch DIR    prepare against torchvision's extraction and a
                                                          plain copy (extraction.py)
    python -m prepare.bench.layouts SCRATCH               prepare per source layout, the same images (layouts.py)
    python -m prepare.bench.part_threads SCRATCH          one gzip part's images in one thread and in several
    python -m prepare.bench.startup_model                 the model of a job start on N nodes (plain Python)
    python -m prepare.bench.inflate SCRATCH               one gzip stream inflated: zlib against rapidgzip
    python -m prepare.bench.full_scale SCRATCH            21,841 classes, a million tiny images: time and memory

Their commands and results: BENCHMARKS.md and docs/benchmarks-history.md.
"""
