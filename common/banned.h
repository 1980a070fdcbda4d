/* Unsafe string functions are build errors (STYLE.md #8, after git's
 * banned.h).  Use snprintf with a checked result, or struct buf. */
#ifndef BERTH_BANNED_H
#define BERTH_BANNED_H

#define BANNED(func) sorry_##func##_is_banned

#undef strcpy
#define strcpy(x, y) BANNED(strcpy)
#undef strcat
#define strcat(x, y) BANNED(strcat)
#undef strncpy
#define strncpy(x, y, n) BANNED(strncpy)
#undef strtok
#define strtok(x, y) BANNED(strtok)
#undef gets
#define gets(x) BANNED(gets)
#undef sprintf
#define sprintf(...) BANNED(sprintf)
#undef vsprintf
#define vsprintf(...) BANNED(vsprintf)

#endif
