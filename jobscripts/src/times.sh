WARN=300      # seconds: keep equal to the @N of --signal above
START=180     # seconds: MPI, TensorFlow and the peak probe start before the benchmark's clock does; a
              # clock that ends after the warning would be cut by it, and a cut run is scored over its whole
              # time limit (docs/running.md, "The scored window")
