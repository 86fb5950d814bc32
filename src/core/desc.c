/* desc.c -- being written */
