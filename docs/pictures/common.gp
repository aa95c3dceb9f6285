# Shared settings of the peal pictures; each script loads it. Variables (gnuplot -e):
#   datadir  directory holding the .dat files written by example_pictures (default ".")
#   outdir   directory the PNG is written to (default ".")
if (!exists("datadir")) datadir = "."
if (!exists("outdir")) outdir = "."
set terminal pngcairo size 800,500 font "DejaVu Sans,10" noenhanced
set grid lc rgb "#dddddd"
set key box opaque
dat(name) = datadir . "/" . name
