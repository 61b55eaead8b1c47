module iotrace.bench/go_tls_loop

go 1.22
