/* SPDX-License-Identifier: MIT */
/* Test fixture: a shared object that is not a pipehost plugin. */
int some_library_function(int x);
int some_library_function(int x)
{
	return x + 1;
}
