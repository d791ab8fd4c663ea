add_library(ft_tracer INTERFACE)
