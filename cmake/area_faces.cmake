add_library(ft_faces INTERFACE)
