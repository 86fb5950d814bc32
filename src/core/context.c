/* context.c -- being written */
