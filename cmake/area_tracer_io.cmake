add_library(ft_tracer_io INTERFACE)
