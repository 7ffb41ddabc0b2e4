/* Placeholder: this file is being written in a parallel change. */
