# Picture 5: which position axis (t, h, w) each rotary pair of an M-RoPE head uses (mrope.dat).
load "common.gp"
set terminal pngcairo size 800,300 font "DejaVu Sans,10" noenhanced
set output outdir . "/mrope.png"
set title "M-RoPE: position axis of each of the 64 pairs of a head (peal::mrope_pair_axes)"
set xlabel "pair j"
set xrange [-0.5:63.5]
set yrange [-0.6:1.9]
set ytics ("Qwen2-VL [16,24,24]" 1, "Qwen3-VL [24,20,20] interleaved" 0)
unset grid
set key top center horizontal noopaque nobox
color(a) = a == 0 ? 0x1f77b4 : (a == 1 ? 0x2ca02c : 0xff7f0e)
plot dat("mrope.dat") u 1:(1):(0.45):(0.35):(color($2)) w boxxyerror fs solid 1 lc rgb variable notitle, \
     "" u 1:(0):(0.45):(0.35):(color($3)) w boxxyerror fs solid 1 lc rgb variable notitle, \
     NaN w boxes fs solid 1 lc rgb "#1f77b4" t "t (time)", \
     NaN w boxes fs solid 1 lc rgb "#2ca02c" t "h (height)", \
     NaN w boxes fs solid 1 lc rgb "#ff7f0e" t "w (width)"
