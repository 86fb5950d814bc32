/* buffer.c -- being written */
