/* dtype.c -- being written */
