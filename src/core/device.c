/* device.c -- being written */
