"""Native backend: bitcode records, llvmlite link/optimize/codegen, and the pipeline."""
