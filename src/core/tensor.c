/* tensor.c -- being written */
