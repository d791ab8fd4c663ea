add_library(ft_runtime INTERFACE)
